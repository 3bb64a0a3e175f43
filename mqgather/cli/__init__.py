"""The ``mqgather`` command line: the top layer, importing every other and imported by none.

One module per command group (processes, operator commands, dev and demo, queues,
analytics), the shared options in :mod:`mqgather.cli.options`, and the entry point in
:mod:`mqgather.cli.main`.
"""
