"""aggregator/cli"""
