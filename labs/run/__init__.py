"""Running a scenario: its typed contract, the check watcher, the engine and its report."""
