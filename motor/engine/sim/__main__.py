import sys

from motor.engine.sim.server import main

sys.exit(main())
