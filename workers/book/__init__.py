"""How a job's parts become files: alignment, timeline, fragments, mastering, tags, assembly.
Imports no speech engine and nothing of workers.runtime or workers.jobs."""
