"""Launching child programs: MPI command lines, host layout, and supervised child processes."""
