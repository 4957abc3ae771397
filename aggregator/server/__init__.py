"""aggregator/server"""
