"""`python -m mlpstorage_py` runs the CLI."""

from mlpstorage_py.main import console

console()
