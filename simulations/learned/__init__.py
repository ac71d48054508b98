"""Learned scheduling priorities (issue #11's stretch): a small network orders the queue,
EASY backfills; trained on real or synthetic traces and compared on held-out real ones.
"""
