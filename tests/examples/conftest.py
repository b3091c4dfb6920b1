"""The example agent's tests use the one local model server of the test session (tests/conftest.py)."""
