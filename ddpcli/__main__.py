from ddpcli.cli.entry import main

main()
