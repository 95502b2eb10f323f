"""Results folders to tables, figures and reports; never runs the emulator."""
