"""TaskError in a module of its own: the task format (task.py) and the KernelBench solutions it
adapts (kernelbench_solution.py) both raise it, and neither imports the other back."""


class TaskError(ValueError):
    """A task directory that cannot be used; the message says what to fix."""
