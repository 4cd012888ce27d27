"""System descriptions (systems/<system>.yaml): written from the host records runs collected,
and compared with them, so a description and the hardware that ran agree (Rules 2.1.7, 2.1.9)."""
