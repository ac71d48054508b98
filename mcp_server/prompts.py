"""The MCP prompts: conversations an assistant starts on the user's behalf.

plan_training_job   "plan my training job": what_if, then build_plan, then (with the
                    user's yes) submit_plan
why_did_my_job_fail "why did my job fail": get_plan_status / get_job_history, then
                    explain_infeasibility or the job's own exit state
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from mcp_server.context import AppContext

__all__ = ["plan_training_job_text", "register_prompts", "why_did_my_job_fail_text"]


def plan_training_job_text(model: str, dataset_samples: int, epochs: int, goal: str) -> str:
    return (
        f"I want to train {model} on {dataset_samples} samples for {epochs} epochs. "
        f"My goal: {goal}.\n\n"
        "Please: (1) call list_systems to see where I could run; (2) write a WorkloadSpec "
        "(kind dnn_training, my user name, a few batch sizes, my goal as goals.objective: "
        "fastest, cheapest, earliest_finish, balanced or deadline) and call what_if with it; "
        "(3) tell me the recommended plan: where, how many nodes and GPUs, walltime, "
        "expected run and wait, and the cost in the center's own unit, plus the best "
        "alternative and the closest infeasible option with why; (4) call build_plan; "
        "(5) ask me before calling submit_plan with confirm=true; never submit unasked."
    )


def why_did_my_job_fail_text(plan_id: str) -> str:
    target = f"plan {plan_id}" if plan_id else "my most recent plan (read rightsize://plans)"
    return (
        f"My job failed: {target}.\n\n"
        "Please: (1) call get_plan_status for it and read each job's state, exit code and "
        "reason; (2) call get_job_history with its plan_id for the jobs' used memory and "
        "runtime against what they requested; (3) if it never ran, call "
        "explain_infeasibility with the plan_id; (4) tell me the cause in one sentence "
        "(out of memory, walltime too short, a policy limit, a crash in my code) and what "
        "to change, with numbers; (5) offer to build a corrected plan with build_plan."
    )


def register_prompts(server: MCPServer[AppContext]) -> None:
    @server.prompt(
        name="plan_training_job",
        title="Plan my training job",
        description="Where should I train this, and how much will it cost?",
    )
    def plan_training_job(
        model: str,
        dataset_samples: str = "20000",
        epochs: str = "50",
        goal: str = "earliest_finish",
    ) -> str:
        samples = int(dataset_samples) if dataset_samples.isdigit() else 20_000
        count = int(epochs) if epochs.isdigit() else 50
        return plan_training_job_text(model, samples, count, goal)

    @server.prompt(
        name="why_did_my_job_fail",
        title="Why did my job fail",
        description="Find out why a plan's job failed and what to change",
    )
    def why_did_my_job_fail(plan_id: str = "") -> str:
        return why_did_my_job_fail_text(plan_id)
