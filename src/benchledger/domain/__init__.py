"""Pure domain: attrs value objects and rules; imports nothing from other layers."""
