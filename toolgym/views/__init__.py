"""Readers of run directories: summary, show, statistics, compare and the HTML report. They read
the typed run record (`toolgym.load_run`) only; nothing here reaches back into a live
environment."""
