"""Score tables, comparisons and plots."""
