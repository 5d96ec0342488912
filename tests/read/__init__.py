"""The read path: plans, fetches, local reads, request counts."""
