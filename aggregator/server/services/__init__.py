"""aggregator/server/services"""
