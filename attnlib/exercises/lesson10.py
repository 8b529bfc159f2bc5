"""Checkers for the exercises of lesson 10."""

from __future__ import annotations
