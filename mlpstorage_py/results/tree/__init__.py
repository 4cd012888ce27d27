"""The results tree read back: one read-only model of a package (or a live results tree) that
validate, reportgen, status, submit, systems and history all read through.

`files` lists and reads every entry at most once per reading, never through a link; `layout`
is the table of where leaves and their records sit, shared with the writers; `package` holds
Package -> System -> Result -> Leaf with typed records.
"""
