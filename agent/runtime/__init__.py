"""Composition root: builds clients from settings, leader election, scheduler wiring, HTTP app."""
