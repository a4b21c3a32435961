"""Link emulation: one pipe model, several shapers, and a fidelity receipt."""
