"""The words the API (`service`) and the workers (`reflectors`) share: namespace
settings, how a state becomes text, reflection kinds and statuses with the typed
draft of a new reflection, the table of job kinds, the consistency-token codec,
hashing of tasks and request bodies, the step fields, the error types and the
schema bases.

It sits below both and above `store` (import-linter's `layers` contract in
pyproject.toml), so a worker never imports the HTTP service to know a word.
"""
