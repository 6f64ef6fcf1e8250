from ddpcli.cli import main

main()
