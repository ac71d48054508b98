"""Settings, from environment variables prefixed ``RIGHTSIZE_`` (or a ``.env`` file).

Defaults are the embedded deployment: a SQLite file under ``~/.rightsize``, the
in-process bus, nothing to start.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from tools.estimators.gpu.trace_folders import TraceFolders

__all__ = ["Settings"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RIGHTSIZE_", env_file=".env", extra="ignore")

    home: Path = Field(
        default=Path("~/.rightsize"), description="Where the embedded deployment keeps its files"
    )
    kb_url: str | None = Field(
        default=None,
        description="sqlite:///FILE or mongodb://HOST/; default: SQLite under home, "
        "or MongoDB when mongo_url is set",
    )
    mongo_url: str | None = Field(default=None, description="MongoDB URL (RIGHTSIZE_MONGO_URL)")
    dnn_models: Path | None = Field(
        default=None,
        description="Folder of a trained DNN estimator bundle to answer with instead of the "
        "shipped one (RIGHTSIZE_DNN_MODELS)",
    )
    cpu_opcost: Path | None = Field(
        default=None,
        description="Folder of a per-operator CPU model to answer with instead of the shipped "
        "one (RIGHTSIZE_CPU_OPCOST)",
    )
    dnn_profiles: Path | None = Field(
        default=None,
        description="CPU sweep dataset (a JSONL file, or a folder holding cpu_sweep.jsonl) "
        "to train the DNN estimators from instead of the shipped one (RIGHTSIZE_DNN_PROFILES)",
    )
    neusight: Path | None = Field(
        default=None,
        description="NeuSight's data folder for training the per-operator GPU model; default: "
        "shared/data/dnn_profiles/neusight beside the repository (RIGHTSIZE_NEUSIGHT)",
    )
    gpu_traces: str | None = Field(
        default=None,
        description="Where GPU step traces persist: a folder (read alone), 'off' (none kept "
        "on disk); default: gpu_traces under home, then the shipped ones (RIGHTSIZE_GPU_TRACES)",
    )

    executor: Literal["auto", "slurm", "tapis", "simulated"] = Field(
        default="auto",
        description="Where jobs run; auto: the local SLURM if one answers, else simulated "
        "(a WARNING says so); a center on Kafka must name it (auto is an error there)",
    )
    simulated_nodes: int = Field(default=4, ge=1)
    simulated_cores_per_node: int = Field(default=48, ge=1)
    simulated_memory_mb_per_node: int = Field(default=192_000, ge=1)
    simulated_speedup: float = Field(
        default=1.0,
        gt=0,
        description="Simulated seconds per real second (1: the real clock, so the simulated "
        "cluster's times are true ones; more runs jobs faster, with times ahead of the clock)",
    )
    tapis_url: str | None = Field(default=None, description="Tenant base URL")
    tapis_system: str | None = Field(default=None, description="Tapis execution system id")
    tapis_app_id: str = "rightsize-run"
    tapis_app_version: str = "1.0"
    tapis_token: str | None = None
    tapis_username: str | None = None
    tapis_password: str | None = None

    # No center in our sources publishes a dollar rate; a plan shows dollars only when
    # these assumptions are set, and labels them as assumptions.
    usd_per_su: float | None = Field(default=None, ge=0, description="Assumed $ per TACC SU")
    usd_per_core_hour: float | None = Field(
        default=None, ge=0, description="Assumed $ per OSC core-hour"
    )
    usd_per_gpu_hour: float | None = Field(
        default=None, ge=0, description="Assumed $ per OSC GPU-hour"
    )

    # The agents (issue #8): `rightsize center run`, `rightsize demo cascade`.
    kafka_bootstrap: str | None = Field(
        default=None,
        description="Kafka bootstrap servers (host:port[,...]); unset: the in-process bus",
    )
    approval: Literal["auto", "user"] = Field(
        default="auto", description="Run the recommended plan, or wait for a plan.decision"
    )
    llm_model: str | None = Field(
        default=None,
        description="Chat model for goal inference: 'openai:MODEL', 'anthropic:MODEL', "
        "'ollama:MODEL' (needs that provider's langchain package) or 'package.module:Class'; "
        "unset: the rule-based planner only",
    )
    checkpoint_overhead_s: int = Field(
        default=300,
        ge=0,
        description="Per cascade segment: start-up plus loading and saving a checkpoint",
    )
    poll_interval_s: float = Field(default=5.0, gt=0, description="How often jobs are polled")
    extend_walltime: bool = Field(
        default=False,
        description="The Scheduler raises a running job's limit in place near its end, up to "
        "the user's request or the partition's MaxTime (SLURM: needs AdminLevel=Operator "
        "for the Rightsize user; see docs/actuators.md)",
    )
    order_queue: bool = Field(
        default=False,
        description="The Scheduler sets pending jobs' priorities in the rightsize order "
        "(largest predicted expansion factor first, starved jobs before all; SLURM: needs "
        "AdminLevel=Operator; see docs/simulations.md, the rightsize order on a real SLURM)",
    )
    starve_h: float = Field(
        default=24.0,
        gt=0,
        description="With order_queue: a job waiting longer goes before all others, and no "
        "running job's limit is extended in place while one does",
    )
    retention_days: float = Field(
        default=7.0,
        gt=0,
        description="A running center deletes processed-event records, plane checkpoints "
        "(each thread's latest excepted) and ended plans' threads older than this",
    )
    retention_interval_s: float = Field(
        default=3600.0, gt=0, description="How often a running center prunes"
    )
    local_system: str = Field(
        default="local", min_length=1, description="Catalog name of the local SLURM cluster"
    )

    # The MCP server (issue #9): `rightsize mcp`.
    mcp_tokens_file: Path | None = Field(
        default=None,
        description="JSON file of MCP users and their bearer tokens' SHA-256 hashes; "
        "default: mcp_tokens.json under home (`rightsize mcp add-user NAME` writes it)",
    )
    mcp_user: str | None = Field(
        default=None,
        min_length=1,
        description="Who the stdio MCP server acts for; default: the login name",
    )

    def gpu_trace_folders(self) -> TraceFolders:
        """Where GPU step traces are kept and read (``gpu_traces``, else under home)."""
        from tools.estimators.gpu.trace_folders import TraceFolders

        return TraceFolders.from_setting(self.home, self.gpu_traces)

    def mcp_tokens_path(self) -> Path:
        return (self.mcp_tokens_file or self.home / "mcp_tokens.json").expanduser()

    def knowledge_base_url(self) -> str:
        if self.kb_url:
            return self.kb_url
        if self.mongo_url:
            return self.mongo_url
        return str(self.home.expanduser() / "rightsize.db")
