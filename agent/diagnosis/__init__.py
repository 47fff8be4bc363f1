"""Pure diagnosis: verdict per job, counterfactual co-location, target zone and impact estimate."""
