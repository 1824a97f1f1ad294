"""Tiny-only parts of the CPU miniature: the accessibility-tree grounder, the oracle planners, copy slots, the tiny judge,
the template teacher and the miniature's preparation stage. No module of the library imports this package; configs name
its parts (`params/mini.yaml`), and the pipeline loads them by their dotted names."""
