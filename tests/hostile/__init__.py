"""The hostile-input suite: generated malformed inputs run through the real CLI (see test_hostile.py)."""
