"""toolgym's own suites, one folder each. Every folder's ``__init__.py`` exposes ``SUITE``, a
:class:`toolgym.Suite` built from the public API only; deleting a folder removes the suite and
nothing else."""
