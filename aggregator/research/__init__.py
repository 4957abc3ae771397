"""aggregator/research"""
