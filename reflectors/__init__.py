"""Reflection workers: routines that turn closed trajectories into reflections.

The queue they consume is filled today: closing a trajectory inserts a
`trajectory.closed` job (store/jobs.py) in the same transaction as the outcome.
"""
