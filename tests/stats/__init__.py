"""Tests of cp_observe._stats."""
