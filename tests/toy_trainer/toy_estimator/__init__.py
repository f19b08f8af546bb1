"""A toy trainer package, written only against the runner (tests/test_trainer_discovery.py)."""
