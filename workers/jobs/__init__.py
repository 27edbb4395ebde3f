"""What happens to a job on the workers: plan, synthesise, retakes, recovery, notifications."""
