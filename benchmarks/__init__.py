"""trioplay's benchmark suite: ``python -m benchmarks [names...] [--rows N] [--quick]``.

Not part of the installed package. ``docs/benchmarks.md`` says what each
benchmark measures, against which baseline, and what it measured last.
"""
