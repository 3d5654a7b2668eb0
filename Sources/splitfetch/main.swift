import SplitfetchCLI

// The command lives in the SplitfetchCLI library, where Swift tests reach it.
await SplitfetchCommand.runCommandLine()
