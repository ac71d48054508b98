"""What a researcher asks to run: a WorkloadSpec and the goals it is planned against.

A spec is validated whole before anything is estimated or submitted (spec separate
from executor): a bad field is an error naming the field and the value, never a
half-built plan.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from knowledge_base.catalog import MemoryMB
from knowledge_base.units import parse_duration_s

__all__ = [
    "DNNTraining",
    "DurationS",
    "GenericJob",
    "Goals",
    "Objective",
    "Optimizer",
    "Precision",
    "WorkloadSpec",
]


def _duration(value: object) -> object:
    return None if value is None else parse_duration_s(value, field="duration")


DurationS = Annotated[int, BeforeValidator(_duration), Field(ge=0)]
"""Seconds: an int, or a string with its unit ("90 min", "2 h", "1-12:00:00")."""

ParamValue = str | int | float | bool


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Objective(StrEnum):
    """What the user wants a plan to minimise."""

    FASTEST = "fastest"  # shortest run time
    CHEAPEST = "cheapest"  # lowest charge
    EARLIEST_FINISH = "earliest_finish"  # queue wait + run time
    BALANCED = "balanced"  # finish time and charge, each relative to the best option
    DEADLINE = "deadline"  # the cheapest option that meets goals.deadline


class Optimizer(StrEnum):
    """The training optimizer: how many extra copies of the weights it keeps."""

    SGD = "sgd"  # SGD with momentum: one state tensor per weight
    ADAM = "adam"  # two state tensors per weight
    ADAMW = "adamw"


class Precision(StrEnum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    AMP = "amp"


class Goals(_Model):
    """The user's goals and hard constraints for a plan."""

    objective: Objective = Objective.EARLIEST_FINISH
    deadline: datetime | None = Field(default=None, description="Finish no later than this")
    budget: float | None = Field(default=None, gt=0, description="Spend at most this much")
    budget_unit: str | None = Field(default=None, description="Unit of budget, e.g. 'SU'")
    gpu_only: bool = False
    cpu_only: bool = False
    systems: list[str] | None = Field(default=None, description="Only plan on these systems")
    partitions: list[str] | None = Field(
        default=None, description="Only these partitions: names or shell patterns ('gpu*')"
    )
    exclude_partitions: list[str] = Field(
        default_factory=list,
        description="Never these partitions (names or shell patterns), e.g. 'condo-*' queues "
        "that belong to other groups: the catalog does not record who may use a queue",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.gpu_only and self.cpu_only:
            raise ValueError("goals: gpu_only and cpu_only cannot both be true")
        if self.budget is not None and not self.budget_unit:
            raise ValueError(
                f"goals.budget_unit: a budget of {self.budget} needs its unit (e.g. 'SU')"
            )
        return self


class DNNTraining(_Model):
    """Training a neural network: what the DNN estimators need to know."""

    kind: Literal["dnn_training"] = "dnn_training"
    model: str = Field(
        min_length=1, description="Model-zoo name (e.g. 'resnet50') or path to a PyTorch file"
    )
    model_class: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="With model: path/to/file.py, the nn.Module subclass in it (traced like "
        "`rightsize estimate --model-class`; the file's example_batch gives the input)",
    )
    model_params: dict[str, ParamValue] = Field(
        default_factory=dict, description="Architecture knobs: width, depth, num_classes..."
    )
    dataset_samples: int = Field(gt=0, description="Training samples per epoch")
    input_shape: list[int] = Field(
        default_factory=list, max_length=8, description="One sample's shape, e.g. [3, 224, 224]"
    )
    epochs: int = Field(gt=0)
    batch_sizes: list[int] = Field(
        min_length=1, max_length=64, description="Candidate batch sizes to plan over"
    )
    precision: Precision = Precision.FP32
    checkpointable: bool = Field(
        default=False, description="Can stop and resume from a checkpoint (enables cascades)"
    )
    framework: Literal["pytorch"] = "pytorch"
    optimizer: Optimizer = Field(
        default=Optimizer.SGD, description="Sets the optimizer state held in memory"
    )
    max_nodes: int = Field(
        default=1, ge=1, description="Nodes the training may span (data parallel); 1: one node"
    )
    command: str | None = Field(
        default=None,
        min_length=1,
        description="What the batch script runs (default 'python train.py'); it reads its "
        "batch size, epochs and cascade segment from RIGHTSIZE_* variables",
    )

    @model_validator(mode="after")
    def _positive(self) -> Self:
        for batch in self.batch_sizes:
            if batch <= 0:
                raise ValueError(f"batch_sizes: every batch size must be positive, got {batch}")
        for dim in self.input_shape:
            if dim <= 0:
                raise ValueError(f"input_shape: every dimension must be positive, got {dim}")
        return self


class GenericJob(_Model):
    """Any other batch job: predicted from the center's history of similar jobs."""

    kind: Literal["generic"] = "generic"
    application: str = Field(min_length=1, description="Executable or application name")
    parameters: dict[str, ParamValue] = Field(default_factory=dict)
    nodes: int | None = Field(default=None, ge=1)
    cores: int | None = Field(
        default=None, ge=1, description="Total cores (without tasks: one rank per core)"
    )
    tasks: int | None = Field(
        default=None, ge=1, description="MPI ranks in all, as sbatch --ntasks (srun starts them)"
    )
    cpus_per_task: int = Field(
        default=1, ge=1, description="Cores per rank (threads), as sbatch --cpus-per-task"
    )
    gpus: int | None = Field(default=None, ge=0, description="Total GPUs")
    memory_mb: MemoryMB | None = Field(
        default=None, description="Per node, as sbatch --mem (the user's own guess)"
    )
    memory_per_task_mb: MemoryMB | None = Field(
        default=None, description="Per rank; or per core (memory_per_core_mb, as --mem-per-cpu)"
    )
    memory_per_core_mb: MemoryMB | None = Field(default=None, description="Per core, MB")
    walltime_s: DurationS | None = Field(default=None, description="The user's own guess, s")

    @model_validator(mode="after")
    def _layout(self) -> Self:
        given = [
            name
            for name in ("memory_mb", "memory_per_task_mb", "memory_per_core_mb")
            if getattr(self, name) is not None
        ]
        if len(given) > 1:
            raise ValueError(f"memory: give one of {', '.join(given)}, as SLURM takes one")
        tasks, cores = self.tasks, self.cores
        if tasks is not None and cores is not None and cores != tasks * self.cpus_per_task:
            raise ValueError(
                f"cores: {cores} is not tasks x cpus_per_task "
                f"({tasks} x {self.cpus_per_task}); give tasks and cpus_per_task only"
            )
        return self

    @property
    def total_tasks(self) -> int:
        """Ranks in all: tasks, else one per cpus_per_task of the cores, else one."""
        if self.tasks is not None:
            return self.tasks
        if self.cores is not None:
            return max(1, self.cores // self.cpus_per_task)
        return 1


class WorkloadSpec(_Model):
    """A request: who runs what, and against which goals."""

    name: str = Field(min_length=1)
    user: str = Field(min_length=1)
    account: str | None = None
    workload: Annotated[DNNTraining | GenericJob, Field(discriminator="kind")]
    goals: Goals = Field(default_factory=Goals)
