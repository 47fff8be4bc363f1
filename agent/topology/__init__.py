"""Pure topology: group pods into training jobs, find roles and zones, measure GPU capacity per zone."""
