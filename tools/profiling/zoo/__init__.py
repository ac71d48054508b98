"""A model zoo in plain PyTorch, grouped in families, each with a configuration space.

Every family builds a model from architecture parameters (width, depth, input size...)
and makes a synthetic batch for it; ``registry`` lists the families and samples their
configuration spaces. Nothing here depends on torchvision.
"""

from tools.profiling.zoo.registry import FAMILIES, Family, TrainingTask, family, named_model

__all__ = ["FAMILIES", "Family", "TrainingTask", "family", "named_model"]
