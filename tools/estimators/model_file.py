"""A user's own model file as a training task the estimators can read.

The file defines an ``nn.Module`` subclass (built with no arguments) and, optionally,
``example_batch(batch_size) -> (inputs, targets)`` or ``(inputs, targets, loss_fn)`` (a
function of the file, or a static method of the class);
``inputs`` is a tensor or a tuple of tensors passed positionally to ``forward``. Without
``example_batch``, ``input_shape`` (C, H, W or any per-sample shape) and
``num_classes`` describe a classifier: random inputs, random class targets,
cross-entropy. Loss is cross-entropy unless ``example_batch`` returns its own.

Every way this can go wrong raises ``InvalidInputError`` naming the problem and the
field (``--model-file``, ``--model-class``, ``--input-shape``...), before anything is
estimated or registered.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import Tensor, nn

from knowledge_base.errors import InvalidInputError
from tools.profiling.opgraph import OpGraph, op_graph
from tools.profiling.zoo.registry import TrainingTask

__all__ = ["UserModel", "load_user_model"]

LossFn = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True, slots=True)
class UserModel:
    """A loaded model file: how to build its model and a batch of any size."""

    path: Path
    class_name: str
    module: ModuleType
    model_class: type[nn.Module]
    input_shape: tuple[int, ...] | None
    num_classes: int | None

    @property
    def digest(self) -> str:
        return hashlib.sha1(self.path.read_bytes()).hexdigest()[:12]

    def batch(self, batch_size: int) -> tuple[tuple[Tensor, ...], Tensor, LossFn | None]:
        # a function of the file, else a static or class method of the model's class
        maker = getattr(self.module, "example_batch", None) or getattr(
            self.model_class, "example_batch", None
        )
        if maker is not None:
            try:
                produced = maker(batch_size)
            except Exception as error:
                raise InvalidInputError(
                    f"example_batch({batch_size}) failed: {type(error).__name__}: {error}",
                    source=str(self.path),
                    field="example_batch",
                ) from error
            return _unpack(produced, self.path)
        if self.input_shape is None or self.num_classes is None:
            raise InvalidInputError(
                "the file has no example_batch(batch_size) (a function, or a static method "
                "of the class); give --input-shape C,H,W and "
                "--num-classes K to describe a classifier's input",
                source=str(self.path),
                field="--input-shape",
            )
        inputs = torch.randn(batch_size, *self.input_shape)
        targets = torch.randint(0, self.num_classes, (batch_size,))
        return (inputs,), targets, None

    def build(self) -> nn.Module:
        try:
            model = self.model_class()
        except Exception as error:
            raise InvalidInputError(
                f"{self.class_name}() could not be built with no arguments: "
                f"{type(error).__name__}: {error}",
                source=str(self.path),
                field="--model-class",
                value=self.class_name,
            ) from error
        return model

    def task(self, batch_size: int, *, meta: bool = False) -> TrainingTask:
        """The training task at ``batch_size`` (on the meta device when ``meta``)."""
        if meta:
            with torch.device("meta"):
                model = self.build()
        else:
            model = self.build()
        inputs, targets, loss = self.batch(batch_size)
        if meta:
            inputs = tuple(torch.empty_like(x, device="meta") for x in inputs)
            targets = torch.empty_like(targets, device="meta")
        return TrainingTask(model, inputs, targets, criterion=loss)

    def graph(self, batch_size: int) -> OpGraph:
        """The op graph of one training step; InvalidInputError if it cannot be traced
        (naming ``example_batch`` where its inputs or targets do not fit the model)."""
        errors: list[str] = []
        with _quiet_tracing():
            for meta in (True, False):
                try:
                    return op_graph(self.task(batch_size, meta=meta))
                except InvalidInputError:
                    raise
                except Exception as error:
                    errors.append(f"{type(error).__name__}: {str(error)[:300]}")
            misfit = self._misfit(batch_size)
        if misfit is not None:
            raise misfit
        raise InvalidInputError(
            f"{self.class_name} could not be traced (one training step on fake tensors): "
            + " | ".join(errors[-1:]),
            source=str(self.path),
            field="--model-class",
            value=self.class_name,
        )

    def _misfit(self, batch_size: int) -> InvalidInputError | None:
        """Why ``example_batch``'s inputs or targets do not fit the model (one forward and
        one loss at ``batch_size``, outside any trace), or None where both run."""
        model = self.build().train()
        inputs, targets, loss = self.batch(batch_size)
        try:
            out = model(*inputs)
        except Exception as error:
            return InvalidInputError(
                f"the model's forward does not take example_batch({batch_size})'s inputs of "
                f"shape {_shapes(inputs)}: {type(error).__name__}: {str(error)[:200]}",
                source=str(self.path),
                field="example_batch",
            )
        criterion = loss or nn.functional.cross_entropy
        try:
            criterion(out, targets)
        except Exception as error:
            if isinstance(out, Tensor):
                shape = str(tuple(out.shape))
            elif isinstance(out, tuple | list):
                shape = _shapes([t for t in out if isinstance(t, Tensor)])
            else:
                shape = type(out).__name__
            return InvalidInputError(
                f"the loss does not take the model's output of shape {shape} with "
                f"example_batch({batch_size})'s targets of shape {tuple(targets.shape)}: "
                f"{type(error).__name__}: {str(error)[:200]}",
                source=str(self.path),
                field="example_batch",
            )
        return None


@contextmanager
def _quiet_tracing() -> Iterator[None]:
    """Silence torch's own logging of a failed fake-tensor trace (it logs the whole
    traceback at ERROR before raising); the error is reported once, as one line."""
    loggers = [logging.getLogger(n) for n in ("torch._subclasses.fake_tensor", "torch.fx")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _shapes(tensors: Sequence[Tensor]) -> str:
    return ", ".join(str(tuple(t.shape)) for t in tensors)


def _unpack(produced: Any, path: Path) -> tuple[tuple[Tensor, ...], Tensor, LossFn | None]:
    if not isinstance(produced, tuple) or len(produced) not in (2, 3):
        raise InvalidInputError(
            "example_batch must return (inputs, targets) or (inputs, targets, loss_fn)",
            source=str(path),
            field="example_batch",
        )
    inputs, targets = produced[0], produced[1]
    loss = produced[2] if len(produced) == 3 else None
    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, tuple | list) or not all(isinstance(x, Tensor) for x in inputs):
        raise InvalidInputError(
            "example_batch: inputs must be a tensor or a tuple of tensors",
            source=str(path),
            field="example_batch",
        )
    if not isinstance(targets, Tensor):
        raise InvalidInputError(
            "example_batch: targets must be a tensor", source=str(path), field="example_batch"
        )
    if loss is not None and not callable(loss):
        raise InvalidInputError(
            "example_batch: the third item must be a loss function",
            source=str(path),
            field="example_batch",
        )
    return tuple(inputs), targets, loss


def load_user_model(
    path: Path,
    class_name: str,
    *,
    input_shape: Sequence[int] | None = None,
    num_classes: int | None = None,
) -> UserModel:
    """Import ``path`` and find ``class_name`` in it; InvalidInputError on any problem."""
    if not path.is_file():
        raise InvalidInputError("no such file", field="--model-file", value=str(path))
    if input_shape is not None and (not input_shape or any(d <= 0 for d in input_shape)):
        raise InvalidInputError(
            "every dimension must be positive", field="--input-shape", value=list(input_shape)
        )
    if num_classes is not None and num_classes <= 0:
        raise InvalidInputError("must be positive", field="--num-classes", value=num_classes)
    name = f"rightsize_user_model_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InvalidInputError("not a Python file", field="--model-file", value=str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        sys.modules.pop(name, None)
        raise InvalidInputError(
            f"the file does not import: {type(error).__name__}: {error}",
            source=str(path),
            field="--model-file",
        ) from error
    found = getattr(module, class_name, None)
    if found is None:
        raise InvalidInputError(
            f"{path.name} defines no {class_name!r}",
            source=str(path),
            field="--model-class",
            value=class_name,
        )
    if not isinstance(found, type) or not issubclass(found, nn.Module):
        raise InvalidInputError(
            f"{class_name!r} is not an nn.Module subclass",
            source=str(path),
            field="--model-class",
            value=class_name,
        )
    return UserModel(
        path=path,
        class_name=class_name,
        module=module,
        model_class=found,
        input_shape=tuple(input_shape) if input_shape else None,
        num_classes=num_classes,
    )
