"""Datasets read through the dataset registry."""
