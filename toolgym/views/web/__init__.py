"""``toolgym view``: a local web app over run directories.

:mod:`toolgym.views.web.index` turns one run directory (read with :func:`toolgym.load_run`) into
a SQLite database with an FTS5 full-text index, so the server answers a page of rows, a filter
or a search without holding the run in memory and the browser never receives a whole run;
:mod:`toolgym.views.web.app` is the Starlette application (the JSON API under ``/api`` and the
page that uses it); :mod:`toolgym.views.web.diff` aligns two trajectories step by step. The API
is documented in ``docs/view.md``.
"""
