"""Checkers for the exercises of lesson 12."""

from __future__ import annotations
