import DownloadCore
import Testing

/// The per-host cap's decisions: who gets a slot, who waits, who gets a freed one.
@Suite("Host shares")
struct HostSharesTests {
    @Test func slotsAreGrantedUpToTheCapThenTicketsWaitInOrder() {
        var shares = HostShares(cap: 2)
        #expect(shares.request(for: 1) == .granted)
        #expect(shares.request(for: 1) == .granted)
        guard case .waiting(let first) = shares.request(for: 2), case .waiting(let second) = shares.request(for: 1) else {
            Issue.record("a third request must wait")
            return
        }
        #expect(first < second)
        #expect(shares.inUse == 2 && shares.held(by: 1) == 2 && shares.waitingDownloads == [2, 1])
    }

    /// A freed slot goes to the waiting download that holds the fewest, the earliest on a tie:
    /// a download that arrives while another holds everything gets the next slot, and shares
    /// even out.
    @Test func aFreedSlotGoesToTheWaiterHoldingTheFewest() {
        var shares = HostShares(cap: 3)
        for _ in 0..<3 { #expect(shares.request(for: 0) == .granted) }
        var tickets: [Int: [HostShares.Ticket]] = [:]
        // B (1) asks twice, then C (2) once, then A (0) once more.
        for download in [1, 1, 2, 0] {
            guard case .waiting(let ticket) = shares.request(for: download) else {
                Issue.record("every slot is taken")
                return
            }
            tickets[download, default: []].append(ticket)
        }
        // A's transfers end one by one: B (none held, earliest), C (none held), then A itself
        // (none held once it let go, against B's one): a slot each.
        #expect(shares.release(by: 0) == tickets[1]![0])
        #expect(shares.release(by: 0) == tickets[2]![0])
        #expect(shares.release(by: 0) == tickets[0]![0])
        #expect(shares.held(by: 0) == 1 && shares.held(by: 1) == 1 && shares.held(by: 2) == 1)
        // C's connection goes idle: it is B's next one.
        #expect(shares.release(by: 2) == tickets[1]![1])
        #expect(shares.inUse == 3 && shares.waitingDownloads.isEmpty && shares.held(by: 1) == 2)
    }

    @Test(arguments: [
        // held by download 0, held by download 1, waiting downloads in ticket order → the one served
        (3, 0, [1, 0], 1),
        (1, 2, [1, 0], 0),  // 0 holds fewer than 1, though 1 asked first
        (2, 2, [1, 0], 1),  // a tie: the earlier ticket
    ])
    func theFewestHeldWinsThenTheEarliestTicket(heldA: Int, heldB: Int, waiting: [Int], served: Int) {
        // Download 2 holds one more slot, and lets it go.
        var shares = HostShares(cap: heldA + heldB + 1)
        for _ in 0..<heldA { _ = shares.request(for: 0) }
        for _ in 0..<heldB { _ = shares.request(for: 1) }
        _ = shares.request(for: 2)
        var ticketOf: [HostShares.Ticket: Int] = [:]
        for download in waiting {
            if case .waiting(let ticket) = shares.request(for: download) { ticketOf[ticket] = download }
        }
        // Download 9 holds none: its release changes nothing.
        #expect(shares.release(by: 9) == nil)
        let granted = shares.release(by: 2)
        #expect(granted.flatMap { ticketOf[$0] } == served)
    }

    @Test func aWithdrawnTicketIsNeverServed() {
        var shares = HostShares(cap: 1)
        #expect(shares.request(for: 0) == .granted)
        guard case .waiting(let gone) = shares.request(for: 1), case .waiting(let kept) = shares.request(for: 2) else {
            Issue.record("the slot is taken")
            return
        }
        let withdrawn = shares.withdraw(gone)
        let again = shares.withdraw(gone)
        #expect(withdrawn && !again)
        #expect(shares.release(by: 0) == kept)
        #expect(shares.release(by: 2) == nil)
        #expect(shares.inUse == 0)
        #expect(shares.request(for: 1) == .granted)
    }
}

/// A per-host cap changed while requests hold slots.
@Suite("Host shares: a changed cap")
struct HostSharesCapTests {
    @Test(arguments: [
        // cap, then new cap; requests held by download 0, waiting requests by download 1
        // → granted at once by the change, slots in use after it
        (2, 4, 2, 3, 2, 4),
        (2, 3, 2, 3, 1, 3),
        (4, 2, 4, 1, 0, 4),  // lower: nothing is taken back
        (2, 2, 2, 1, 0, 2),
    ])
    func aHigherCapGrantsWaitersALowerOneTakesNothingBack(cap: Int, newCap: Int, held: Int, waiting: Int,
                                                           granted: Int, inUse: Int) {
        var shares = HostShares(cap: cap)
        for _ in 0..<held { _ = shares.request(for: 0) }
        for _ in 0..<waiting { _ = shares.request(for: 1) }
        #expect(shares.setCap(newCap).count == granted)
        #expect(shares.inUse == inUse && shares.cap == newCap)
    }

    /// Under a lowered cap, a released slot goes to no one until fewer than the cap are in use.
    @Test func aLoweredCapGrantsNothingUntilBelowIt() {
        var shares = HostShares(cap: 4)
        for _ in 0..<4 { _ = shares.request(for: 0) }
        _ = shares.request(for: 1)
        #expect(shares.setCap(2).isEmpty)
        #expect(shares.release(by: 0) == nil)  // 3 in use
        #expect(shares.release(by: 0) == nil)  // 2 in use
        #expect(shares.room() == 0)
        #expect(shares.release(by: 0) != nil)  // 1 in use: the waiter gets the second slot
        #expect(shares.inUse == 2)
    }
}
