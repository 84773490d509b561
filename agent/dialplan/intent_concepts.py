"""Everyday ways of saying what a caller commonly asks a contact centre for.

A dialplan's intent lists a handful of examples ("agent", "talk to a person"); callers say the same
thing in many other ways ("could you put me through to someone"). A :class:`Concept` is a common
request with phrasings of it; an intent *adopts* a concept when one of the intent's own examples
is one of the concept's anchors (an intent with the example "agent" adopts the human-agent
concept), and the concept's phrases then count as that intent's examples for the semantic
comparison (not for the lexical one, which keeps to the dialplan's words).

:data:`BACKGROUND` lists requests that an intent does not cover unless its examples say so: a
transcript nearer to one of them than to any intent is refused as out of scope. So are the
phrases of a request concept that no intent of the ask adopts (:func:`background_concepts`): a
caller saying goodbye where only a person is offered is not asking for the person. A background
phrase that is close to one of an ask's own examples is left out for that ask (see
:mod:`agent.dialplan.semantic`), so a dialplan that does offer "report a lost card" gets it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ANSWERS", "BACKGROUND", "CLOSINGS", "CONCEPTS", "Concept", "NEGATIVE_ANSWERS", "ROUTED", "SAID_BY_CALLERS",
           "adopted", "background_concepts", "concept_phrases"]


@dataclass(frozen=True)
class Concept:
    """A common request: *anchors* (examples that identify it in a dialplan) and *phrases*."""

    name: str
    anchors: frozenset[str]
    phrases: tuple[str, ...]


#: How callers said these requests in the evaluation corpus's development half: the texts of its first
#: two batches there (ops/bench/eval-texts; docs/evaluation.md, "Callers' own words as phrasings"),
#: added to the concepts' phrasings (key: concept) and to the background (key: None). The third
#: batch (``*-dev3.yaml``) is not among them, so that the matcher can still be tuned on texts it has
#: not seen; the test half never is.
SAID_BY_CALLERS: dict[str | None, str] = {
    'human_agent': """
        can i get put through to someone in the office
        can i get someone on the line
        can i talk to a real human
        can somebody from your team pick up
        can you get me a manager
        connect me to a live operator
        connect me to the front desk
        could you connect me with somebody who works there
        get a live body on the phone please
        get me someone
        hand me over to one of your people
        hello is there a live someone i could chat with
        hook me up with somebody who can actually help
        i don't want to do this with a robot
        i need a human being please
        i need a real live person not a machine
        i need help from an actual employee
        i need to reach your support staff
        i'd like to chat with an actual staff member
        i'd like to talk to somebody please
        i'd prefer to talk it over with a staff member
        is there anyone i can explain my problem to
        is there somebody there i can explain this to
        just get me a human being
        let me chat with an actual employee
        put me through to the help desk
        send me to whoever handles complaints
        somebody please anybody
        uh can i get a real human on the line
        uh can i get a staff member on the line
        uh i want someone to walk me through this
        um could you pass me over to a colleague
        """,
    'end_call': """
        alright i'm off
        cheers bye
        cheers have a good one
        great i'm going to go now
        i think i'm done here bye
        i want i'd like to finish the call now
        i'll call back another time bye
        i'm done thanks bye
        i'm finished here take care
        i'm out thanks
        i've got to run talk later
        i've heard enough i'm going
        ok great i'm all done have a good day
        okay i'll let you go
        okay talk to you later
        thanks so much good night
        that'll do goodbye
        that's it from me cheers
        um i'm going to disconnect now
        um never mind i'll go
        we're done here you can disconnect
        """,
    'account_balance': """
        am i running low on funds
        am i still above zero
        can you read me the figure on my checking
        can you see how much i've got in the bank
        could you give me a rundown of what's in my accounts
        could you let me know my current funds
        did my deposit go through and what's the total now
        did my transfer land how much is there now
        has my pay hit and what's the sum
        has my tax refund landed what's it at now
        hey what's left in my savings
        hi i'm just calling to see how much i have
        hi i'm wondering what my funds look like right now
        hi there i was hoping to find out what i have in checking
        hi yeah i just need to hear how much i've got
        how are my finances looking
        how much did i end up with after payday
        how much do i have in total across my accounts
        how much is available for me to withdraw
        how much is in my checking and my savings
        how much is on deposit with you
        i just want the figure for my savings
        i need the figure in checking before i write a check
        i wanna hear my current available funds
        i was wondering how much cash i've got
        i'd like the amount in my savings please
        i'm calling to find out my available funds
        is there enough in there to cover a five hundred dollar payment
        my rent's due what have i got
        read out what's in my savings for me
        so uh how much is in there
        tell me the amount i can take out today
        uh i'm wondering if i've got enough for groceries
        uh quick question how much do i have to work with
        um i need to know if i have enough for the bills
        um what's my checking at
        what am i sitting at
        what am i sitting at right now
        what have i got in checking as of today
        what's left after that last purchase
        what's my available amount
        what's the current amount on my savings
        what's the state of my finances with you
        """,
    'opening_hours': """
        are you around on public holidays
        are your doors open over the holiday
        can i come in on saturday morning
        can i swing by after work like six-ish
        do you close early on fridays
        er what are the times for the branch
        how long is the branch staffed on saturdays
        i was wondering what time you shut today
        i was wondering what time you start in the morning
        i'm trying to plan a visit what times work
        is anybody at the branch after six
        is anyone there at lunchtime
        is the bank working on monday
        is the branch staffed on weekends
        is the office staffed on weekends
        tell me when you're open tomorrow
        uh how late does the branch stay open
        uh when can i visit the branch
        um when can i stop by the branch
        what days do you work
        what time do you folks shut today
        what time do you guys stop for the day
        what time do you lock up tonight
        what time does the bank start letting people in
        what time does the branch start in the morning
        what time does the office shut on weekdays
        when do you folks start taking customers in the morning
        when do you start up on mondays
        when's the latest i can walk in
        """,
    'nothing_more': """
        i don't need anything more
        i don't think i need anything
        i think i'm done
        i think i'm good
        i think that's about it
        i'm all good here
        i'm good for now
        i'm set thank you
        nah i'm good
        nah you've covered it
        naw i'm fine
        no i'm good for now
        no i'm sorted
        no need i got what i called for
        no that should do it
        no you've been very helpful
        nope i'm all set
        nope i've got what i needed
        nope that takes care of it
        nope that's all i wanted
        nope you answered my question
        not at the moment
        that should do it for today
        that sorted me out nothing more
        that was the only thing
        that'll be it thanks
        that's everything for today
        uh no i'm okay
        um no i'm all set
        um no i'm alright
        """,
    'more_help': """
        absolutely there's more
        actually i do i'd like to ask about something else
        actually there is one more thing
        correct i need more help
        hold on there's another thing i wanted to ask
        i do have one more
        i need more help
        i'm not finished there's another thing
        indeed i do
        oh one last thing
        okay i've got a follow up question
        one more question if that's ok
        please there's one more issue
        sure i have a second question
        sure i need help with something else too
        sure thing i wanted to ask about a different matter
        there's more i'd like to ask
        there's one more matter
        there's something more i need
        uh yep hang on one more
        uh yep one more
        um yep one more
        wait i'm not done yet
        well i was wondering about one more thing
        yeah actually another question
        yeah quick follow-up
        yep i'd like to ask about a different issue
        yep there is
        yes a different question
        yes can you help with something different
        yes i'd like to go back to the menu
        yes there's one more
        """,
    None: """
        can i add a beneficiary to my savings
        can i change my address
        can i deposit a check by phone
        can i get a cashier's check
        can i make a payment on my loan
        can i set up a recurring payment to my landlord
        can i trade a roll of coins for bills
        can i withdraw cash without my card
        can you send me a new card
        can you tell me about your rewards credit card
        can you waive a late fee
        can you waive the monthly fee
        do you buy back foreign currency
        do you have safe deposit boxes
        how do i deposit a check with my phone
        how do i get a mortgage pre-approval
        how do i order a replacement card
        i forgot my pin
        i need a letter confirming my account for my landlord
        i need proof of funds for a visa application
        i need to stop a payment
        i want to apply for a loan
        i want to cancel a transfer i made yesterday
        i want to set up direct deposit
        i want to talk about a payment plan for my loan
        i was charged twice for the same thing
        i'd like to make a complaint about a branch
        i'd like to refinance my car loan
        i'd like to set up a savings goal
        i'd like to set up account alerts
        i'd like to update my phone number
        is my card blocked
        my address has changed
        my app keeps crashing
        my card doesn't work at the gas pump
        my card got declined at the store
        my direct deposit is missing
        my mobile app keeps crashing
        my online account is locked
        my online banking password isn't working
        my statement has the wrong name on it
        someone's been calling me pretending to be from the bank
        what documents do i need for a mortgage
        what documents do i need to open an account
        what interest do you pay on savings
        what's the exchange rate for euros
        what's the penalty for breaking a certificate of deposit early
        what's the swift code for international transfers
        what's the weather like today
        where do i mail a loan payment
        where's the nearest atm
        """,
}


def _lines(block: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in block.strip().splitlines() if p.strip())


def _concept(name: str, anchors: str, phrases: str) -> Concept:
    return Concept(
        name,
        frozenset(a.strip() for a in anchors.split("|")),
        _lines(phrases) + _lines(SAID_BY_CALLERS.get(name, "")),
    )


CONCEPTS: tuple[Concept, ...] = (
    _concept("human_agent", "agent|representative|operator|talk to a person|speak to a person|a real person|human", """
        talk to a real person
        speak with a human being
        put me through to someone
        transfer me to a representative
        connect me with somebody
        i want to speak to someone
        can i talk to a live person
        let me speak to a staff member
        get me an employee
        i need a human not a machine
        i don't want to talk to a robot
        is there anyone i can talk to
        someone who can help me
        speak to customer support
        pass me to a colleague
        the help desk please
        reception please
        i'd rather talk to a person
        a live agent
        somebody please
        whoever deals with this
        the front desk
        someone in your office
        a person who can sort this out
        your customer service team
        a supervisor
        can i speak to an actual person
        i'd like to talk to somebody
        could you connect me to an agent
        put me through to a human please
        i need to speak with someone about my account
        get me a real human
        i want a person on the line
        is there a person i can speak with
        let me talk to a live representative
        operator please
        i want to talk to your staff
        could i have a word with someone
        please get someone on the phone
        someone from customer care
        i need assistance from a person
        can i get some help from a human
        i'd like to speak to an advisor
        can i speak to a manager
        one of your agents please
        i don't want the machine
        i'm tired of talking to a computer
        real person please
        give me someone i can talk to
        is anybody there who can help
        speak to a rep
        i want to speak to a banker
        could you hand me over to someone
        i need to talk to a customer service agent
        """),
    _concept("end_call", "goodbye|bye|bye bye|hang up|end the call", """
        goodbye
        bye now
        see you
        take care bye
        thanks bye
        i'm going to hang up now
        you can end the call
        disconnect the call
        i have to go
        i'll call back later
        that's it for me bye
        have a nice day
        talk to you later
        i'm leaving now
        cheerio
        later
        end this call
        i'm finished goodbye
        so long
        farewell
        good night
        i'm off now
        never mind i'll go
        gotta go
        catch you later
        all done have a good day
        okay bye
        alright goodbye
        thanks for your help goodbye
        bye for now
        see you later
        speak to you soon
        i'll let you go
        you can hang up now
        please hang up
        stop the call
        we're done here goodbye
        thanks so much bye bye
        have a good one
        take care
        adios
        i'm hanging up
        i need to go now
        i have to run
        ta ta
        ta ra
        toodle-oo
        toodles
        laters
        ciao
        peace out
        ok thank you bye
        thank you goodbye
        """),
    _concept("account_balance", "balance|account balance|check my balance|what is my balance", """
        how much money is in my account
        how much money do i have left
        what's in my checking account
        how much is in my savings
        my current balance
        what is the amount in my account
        how much cash do i have
        do i have enough money
        how much can i spend
        what's my available balance
        how much have i got in the bank
        tell me my account total
        is my account overdrawn
        am i out of money
        what funds are available
        did my pay go in and how much is there
        what's the total in my account
        has my deposit cleared and what is my balance
        how much is left
        am i in credit
        what am i at right now
        what's my balance right now
        can you tell me how much i have
        how much do i have in my account
        what's left in my account
        how much money have i got
        i'd like to know my balance
        what's the balance on my checking
        how much is available to spend
        do i have money in my account
        can i find out how much money i have
        read me my balance
        how much do i have available
        could you give me my balance
        how much is sitting in my account
        did my paycheck come in
        """),
    _concept("opening_hours", "opening hours|hours|business hours|when are you open", """
        what are your opening times
        when do you open
        when do you close
        what time does the branch open
        what time do you shut
        are you open on saturday
        are you open on sunday
        are you open today
        when can i come to the branch
        what are the branch hours
        how late are you open
        how early do you open in the morning
        are you closed on holidays
        what days are you open
        when is the office open
        until what time are you there
        can i visit the bank this weekend
        what are your hours
        what time are you open until
        when do you open tomorrow
        what are your hours on the weekend
        are you open right now
        when does the bank close today
        what time do you open on monday
        are you open late
        what are your office hours
        are you open in the evening
        do you open on public holidays
        when does the branch close
        how long are you open today
        what hours do you keep
        is the branch open now
        when will you be open
        """),
    _concept("decline", "no|no thank you", """
        no
        nope
        nah
        no thank you
        not really
        i don't think so
        no that's fine
        no i'm fine
        not now
        no i'm good
        """),
    _concept("nothing_more", "nothing else|nothing|that is all", """
        nothing else
        that's everything
        that's all i needed
        i'm all set
        i'm good thanks
        i have everything i need
        you've been very helpful that's it
        no more questions
        nothing more thank you
        that was all
        i'm done thanks
        that answers my question
        that covers it
        that will do
        that's the only thing
        nothing further
        i'm alright thanks
        that's it
        i don't need anything else
        no that's all thanks
        no nothing else
        that's all for today
        nope that's it
        i'm fine thank you
        that's all i wanted
        all good thanks
        no i'm all good
        nothing at the moment
        not today thanks
        i think that's everything
        that's all i need
        i got what i needed
        no further questions
        """),
    _concept("affirm", "yes|yes please|yeah", """
        yes
        yeah
        yep
        yup
        sure
        of course
        absolutely
        correct
        that's right
        indeed
        i do
        """),
    _concept("more_help", "something else", """
        something else
        i have another question
        there's one more thing
        i need help with something else
        one more question
        i'd like to ask something else
        yes there is
        there's something else
        another thing
        can you help me with something more
        one more
        just one more thing
        i've got another question
        a different question
        there's more
        i still need help
        yes one more thing
        can i ask you something else
        there's something else i need
        i have another request
        wait one more thing
        hold on i have another question
        yes i need something else
        i need to ask another question
        could you help me with another thing
        i also wanted to ask
        there is one other thing
        """),
)
"""The common requests, each adopted by the intents that list one of its anchors."""


BACKGROUND: tuple[str, ...] = _lines("""
    i lost my card
    my card has been stolen
    block my card
    cancel my credit card
    i want to open a new account
    close my account
    i need a loan
    what are your interest rates
    mortgage rates
    apply for a credit card
    raise my credit limit
    report fraud
    there is a charge i don't recognise
    dispute a transaction
    reset my password
    i can't log in to online banking
    change my address
    update my phone number
    order a new cheque book
    what is the routing number
    send a wire transfer
    transfer money to another account
    move money into my savings account
    pay a bill
    make a payment
    send me a statement
    where is the nearest atm
    where is your branch
    the atm ate my card
    my direct deposit
    set up direct debit
    what is the weather like
    tell me a joke
    i don't know
    can you help me
    hello
    hello who is this
    i have a complaint
    i want to make a complaint about a fee
    why was i charged a fee
    what currency exchange rates do you have
    what interest do you pay
    deposit a check
    deposit a cheque with my phone
    i need a bank draft
    my account is locked
    i need a letter from the bank
    add someone to my account
    set up text alerts
    withdraw money without a card
    someone is pretending to be from the bank
    i think i've been scammed
    i want to speak about my insurance
    increase my overdraft
    get a new pin
    activate my card
    what's the interest rate on a savings account
    open a savings account
    i need to update my details
    change my pin
    my card isn't working
    my card was declined
    how do i apply for a mortgage
    cancel a direct debit
    stop a payment
    i need to order a new card
    my card expired
    can i increase my daily limit
    i want to change my account type
    add a joint account holder
    set up online banking
    how do i use the app
    i'm travelling abroad
    what's my credit score
    how many reward points do i have
    what's the exchange rate
    i want to make a deposit
    when will my check clear
    where is my new card
    my payment didn't go through
    i was charged twice
    i want a refund
    cancel my subscription
    i have a question about my bill
    i want to pay off my loan
    book an appointment at the branch
    i have a question about taxes
    who am i speaking to
    what can you do
    i want to give feedback
    sorry wrong number
    what's your address
    what is my account number
    i forgot my username
    how do i order foreign currency
    i need a replacement card
    transfer a balance to another credit card
    what is the minimum balance for this account
    my balance looks wrong
    how much do i owe on my credit card
    what is my credit limit
    how much interest have i earned
    show me my recent transactions
    i need proof of funds
    a letter confirming my balance
    order cash for delivery
    withdraw cash at the counter
    i want to complain about a member of staff
    can someone come to my house
    book an appointment with an advisor
    is there a branch near me
    is the atm working
    how long does a transfer take
    open a business account
    check the status of my loan application
    how much can i borrow
    """) + _lines(SAID_BY_CALLERS[None])
"""Requests that no intent covers unless its own examples say so."""


CLOSINGS = frozenset({"end_call", "nothing_more"})
"""Concepts that close the call or the conversation: never what "I'm not done" asks for."""

NEGATIVE_ANSWERS = frozenset({"decline", "nothing_more"})
"""Concepts said in the negative ("no", "I don't need anything else"): a negation is their request."""

ANSWERS = NEGATIVE_ANSWERS | {"affirm"}
"""Concepts that answer the question asked rather than make a request: what they mean depends
on the question ("no", "that's all" may end the call at a menu that offers no "nothing else").
They are never background (:func:`background_concepts`)."""

ROUTED = frozenset({"human_agent"})
"""Concepts that an integrator's own intents often are under other names: an intent "sales" or
"tech support" is a request for a person too ("can I speak with tech support"). Never
background either."""


def _adopted(examples: tuple[str, ...] | list[str]) -> list[Concept]:
    own = {" ".join(e.lower().replace("'", "").split()) for e in examples}
    return [c for c in CONCEPTS if any(a.replace("'", "") in own for a in c.anchors)]


def adopted(examples: tuple[str, ...] | list[str]) -> frozenset[str]:
    """The names of the concepts that one of *examples* anchors (normalised comparison)."""
    return frozenset(c.name for c in _adopted(examples))


def background_concepts(examples: tuple[str, ...] | list[str]) -> list[Concept]:
    """The common requests that none of *examples* anchors, answers and :data:`ROUTED` aside:
    at an ask whose intents are these examples', a caller who makes one of them asks for
    something the ask does not offer ("okay, talk to you later" where only a person is
    offered). :class:`agent.dialplan.semantic.SemanticIndex` also leaves out one that the
    ask's examples say in their own words ("when does the store open")."""
    taken = {c.name for c in _adopted(examples)}
    return [c for c in CONCEPTS if c.name not in taken | ANSWERS | ROUTED]


def concept_phrases(examples: tuple[str, ...] | list[str]) -> list[str]:
    """The phrases of every concept that one of *examples* anchors (normalised comparison)."""
    return [p for c in _adopted(examples) for p in c.phrases]
