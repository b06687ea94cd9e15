from odradek.cli.main import main

main()
