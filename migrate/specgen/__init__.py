"""Generators of the spec tables the runtime reads (``make schema``, ``make schema-upstream``).

They import the trainers whose classes they describe (titan, or upstream torchtitan in its own
environment); no runtime module imports them.
"""
