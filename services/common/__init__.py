"""What every service's composition root shares: settings, logging, signals, wiring helpers.

Not a service: it holds no business rules, and gateway, handler and leader may all use it.
"""
