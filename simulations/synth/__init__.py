"""Synthetic job traces fitted on real SWF logs (issue #11, seed 003).

``columns`` turns traces into tables and back; ``classes`` groups jobs by user and size;
``copula``, ``tvae`` and ``sequence`` (jobs in time order, with ``intensity``'s
operational time and users' sessions) are the generators; ``generator`` samples and
writes traces, ``constraints`` enforces and checks what is emitted, ``model_files`` saves
and loads fitted models (``model_state`` says when a state does not fit), and
``fidelity`` and ``temporal`` compare a synthetic trace with the real one.
"""
