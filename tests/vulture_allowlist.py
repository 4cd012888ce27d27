"""Names vulture cannot see used (tests/test_layers.py::test_no_dead_code): each is called by a
framework or an entry point by its name, never by our code. vulture reads this file as code;
an attribute named here counts as used everywhere."""

# ruff: noqa
_ = object()

# DLIO calls its storage and reader plug-ins by these names (storage/dlio_s3dlio.py).
_.READER_CLASS, _.create_namespace, _.get_namespace, _.create_node, _.get_node, _.walk_node
_.delete_node, _.put_data, _.get_data, _.get_basename, _.is_index_based, _.is_iterator_based
_.S3dlioReader, _.exist_ok, _.length
# The standard library calls these: logging.Handler.handleError, tarfile's TarInfo owner names,
# yaml's Dumper.ignore_aliases, html.parser's handlers, a datetime subclass's now(tz).
_.handleError, _.gname, _.uname, _.ignore_aliases
_.handle_starttag, _.handle_startendtag, _.handle_endtag, _.handle_data, _.tz
# Signal handlers and argparse actions take arguments they need not use.
_.signum, _.frame, _.option_string
# pytest reads these by name: module marks and fixtures used only as parameters or autouse.
_.pytestmark, _.isolated, _.isolated_session, _.validate_in_workers, _.mpl_cache, _.busy_machine, _.pytest_report_header
_._tracefs_on_hosts
# system_schema dispatches its section checks by name (getattr(self, f"_{name}_rule")).
_._power_rule, _._network_port_rule, _._capabilities_rule, _._architecture_rule, _._system_under_test_rule
# Importing a rules module registers its rules; the tuple names them in their order.
_.RULE_MODULES
# pathlib reads a Path's string from its _str slot, which results/tree/files.py sets as it makes a child.
_._str
# The benchmark table (benchmarks/table.py) imports each benchmark's class by its name.
_.TrainingBenchmark, _.CheckpointingBenchmark, _.VectorDBBenchmark, _.KVCacheBenchmark
# The interpreter reads an object's __class__, the import system a package's __path__ (the deferred
# TensorFlow of benchmarks/dlio_rank.py sets both).
_.__class__, _.__path__
# tests/test_posix_store.py calls it in the child program it runs, a string vulture does not read.
syscall_guard.forbid_waits
