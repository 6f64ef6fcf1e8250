from ddpcli.cli.app import main

main()
