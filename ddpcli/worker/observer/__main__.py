from ddpcli.worker.observer.entry import main

main()
