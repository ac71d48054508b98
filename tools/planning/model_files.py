"""A user's own model file as the planner's analytic estimator sees it.

A workload may name a PyTorch file instead of a zoo model, as ``rightsize estimate``
takes one (``model: path/to/file.py``, ``model_class: NAME``; the file's optional
``example_batch(batch_size)`` gives the input, else ``input_shape`` and
``model_params.num_classes`` describe a classifier's). ``model_file_facts`` traces one
training step (``tools.estimators.model_file``, torch loads here and only here) and
turns its op graph into the same facts the zoo holds: parameters, forward FLOPs and
saved activations per sample, at the traced input. Tracing runs the file's code, so a
front end calls ``check_model_file`` before planning: a file that does not import,
build or trace is an ``InvalidInputError`` naming ``workload.model`` or
``workload.model_class``, and nothing is planned.
"""

from __future__ import annotations

from pathlib import Path

from knowledge_base.errors import InvalidInputError
from knowledge_base.workload import DNNTraining
from tools.planning.trace_cache import TraceCache, file_digest
from tools.planning.zoo import ModelFacts

__all__ = ["check_model_file", "is_model_file", "model_file_facts"]

_MB = 1024 * 1024
TRACE_BATCH = 2  # small: tracing runs one step on the meta device when it can
_FIELDS = {
    "--model-file": "workload.model",
    "--model-class": "workload.model_class",
    "--input-shape": "workload.input_shape",
    "--num-classes": "workload.model_params.num_classes",
    "example_batch": "workload.model",
}


def is_model_file(workload: DNNTraining) -> bool:
    """Whether the workload names a model file and its class (a script alone is run by
    Profiling instead: no class, nothing to trace)."""
    return workload.model.endswith(".py") and workload.model_class is not None


def _num_classes(workload: DNNTraining) -> int | None:
    value = workload.model_params.get("num_classes")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_Key = tuple[str, int, str, tuple[int, ...], int | None]
_FACTS: dict[_Key, ModelFacts] = {}  # traced in this process (or read from a TraceCache)


def _traced(
    path: str, mtime_ns: int, class_name: str, shape: tuple[int, ...], classes: int | None
) -> ModelFacts:
    key = (path, mtime_ns, class_name, shape, classes)
    facts = _FACTS.get(key)
    if facts is None:
        if len(_FACTS) >= 32:
            _FACTS.pop(next(iter(_FACTS)))
        facts = _FACTS[key] = _trace(*key)
    return facts


def _trace(
    path: str, mtime_ns: int, class_name: str, shape: tuple[int, ...], classes: int | None
) -> ModelFacts:
    from tools.estimators.model_file import load_user_model

    source = Path(path)
    try:
        user = load_user_model(
            source, class_name, input_shape=list(shape) or None, num_classes=classes
        )
        graph = user.graph(TRACE_BATCH)
        inputs, _, _ = user.batch(1)
    except InvalidInputError as exc:
        text = str(exc)
        for prefix in (exc.source, exc.field):
            if prefix:
                text = text.removeprefix(f"{prefix}: ")
        raise InvalidInputError(
            text.replace("--input-shape C,H,W", "workload.input_shape").replace(
                "--num-classes K", "workload.model_params.num_classes"
            ),
            source=path,
            field=_FIELDS.get(exc.field or "", "workload.model"),
            value=exc.value,
        ) from None
    reference = tuple(int(d) for d in inputs[0].shape[1:]) if inputs else shape
    forward = sum(n.flops for n in graph.nodes if not n.backward)
    flops = forward or graph.flops / 3  # a training step is about 3 forward passes
    return ModelFacts(
        name=f"{source.name}:{class_name}",
        family="image" if len(reference) == 3 else "sequence",
        parameters=graph.parameters,
        forward_flops=flops / TRACE_BATCH,
        activation_mb=graph.saved_activation_bytes / TRACE_BATCH / _MB,
        reference_input=reference,
        source=f"traced from {path} ({class_name}, one training step at batch {TRACE_BATCH})",
    )


def _key(workload: DNNTraining) -> _Key:
    if workload.model_class is None:
        raise InvalidInputError(
            "a model file needs model_class: the nn.Module subclass to train",
            field="workload.model_class",
        )
    path = Path(workload.model).expanduser()
    try:
        mtime_ns = path.stat().st_mtime_ns
    except OSError as exc:
        raise InvalidInputError(
            f"cannot read the model file: {exc.strerror}", field="workload.model", value=str(path)
        ) from exc
    return (
        str(path.resolve()),
        mtime_ns,
        workload.model_class,
        tuple(workload.input_shape),
        _num_classes(workload),
    )


def model_file_facts(workload: DNNTraining) -> ModelFacts:
    """The facts of the workload's model file (traced once per file version)."""
    return _traced(*_key(workload))


def check_model_file(workload: DNNTraining, traces: TraceCache | None = None) -> ModelFacts | None:
    """Trace the model file now (None for a zoo model); bad files raise, naming the field.
    With ``traces``, a file traced before (the same content) is read instead."""
    if not is_model_file(workload):
        return None
    if traces is None:
        return model_file_facts(workload)
    key = _key(workload)
    if key in _FACTS:
        return _FACTS[key]
    path, _, class_name, shape, classes = key
    digest = file_digest(Path(path))
    facts = traces.get_or_make(
        traces.key("model-facts", digest, class_name, shape, classes, TRACE_BATCH),
        lambda: _trace(*key),
    )
    _FACTS[key] = facts
    return facts
