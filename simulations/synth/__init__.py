"""Synthetic job traces fitted on real SWF logs (issue #11, seed 003).

``columns`` turns traces into tables and back; ``classes`` groups jobs by user and size;
``copula`` and ``tvae`` are the generators; ``generator`` samples and writes traces,
``constraints`` enforces and checks what is emitted, ``model_files`` saves and loads
fitted models, and ``fidelity`` compares a synthetic trace with the real one.
"""
