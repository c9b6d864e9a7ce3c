"""Failing retrievals as a test set: the dataset record (one JSON line per evaluation) and its selection."""
