"""aggregator/analysis"""
