"""The real-writer tier: a scripted Gemini server and a driver for Google's localharness."""
