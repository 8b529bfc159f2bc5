"""Checkers for the exercises of lesson 04."""

from __future__ import annotations
