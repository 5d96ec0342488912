"""One-off A/B measurements, each behind a decision recorded in the performance analysis (docs/dev/); what each
showed is one line in README.md beside them. Run from the repository root as
``.venv/bin/python -m asv_bench.experiments.<name> [flags]``.
"""
