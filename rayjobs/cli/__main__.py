from rayjobs.cli import main

main()
